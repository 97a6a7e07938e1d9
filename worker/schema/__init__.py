"""The contract's vocabulary as pydantic models: what callers send (``edits``) and what wikiq answers
(``answers``). A leaf: it imports nothing of wikiq but the error family, so the HTTP server, the workers, the
MCP tools and the Python client all share one definition without pulling in each other's dependencies.
"""
