"""Reaching the web for the agent's tools: which addresses may be reached and a resolver that pins
connections to the checked ones (guard), a size-capped GET that re-checks every redirect (fetch),
HTML → Markdown (extract: the daemon's side, which hands the page to the worker; readable: what
the worker runs, lxml and trafilatura), pages read a moment ago (pages: a long page is downloaded
once while it is read part by part) and the search providers' APIs (search). Imports the
vocabulary, config and the worker.
"""
