"""One job in one leadership term: ``batch`` and ``stream`` runs."""
