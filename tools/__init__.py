"""Development tools of wikiq: not part of the installed package (``make lint`` uses them)."""
