"""The operator's page at ``GET /ui``: its routes (:mod:`.page`), the sampler that keeps its 15 minutes
of figures (:mod:`.sampler`), and its static files (``static/``: HTML, CSS and a script of its own)."""
