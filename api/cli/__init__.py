"""The ``wikiq`` command: running the service (``dev``, ``api``, ``worker``, ``doctor``, ``token``) and the
client commands (``wikis``, ``pages``, ``read``, ``submit``, ``job``, ...)."""
