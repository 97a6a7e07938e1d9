"""``python -m api.cli``: the ``wikiq`` command."""

from api.cli.main import main

main()
