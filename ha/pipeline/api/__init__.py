"""What users write: pipelines registered by name (``registry``), a job's execution plan checked
at submission (``plan``), and streaming pipelines (``streaming``). The names users import are
re-exported by ``ha.pipeline``."""
