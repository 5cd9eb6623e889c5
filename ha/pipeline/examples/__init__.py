"""The pipelines shipped with ``ha`` (registered on the first lookup, ``registry``): ``clicks``,
a batch pipeline and its data generator; ``events``, a streaming one and its generator."""
