"""`policyd playground`: a page on localhost that edits, lints and runs policies on a cluster.

`session` does the work of a request (lint, run), `worker` runs it in a child process bounded in
time, `server` serves the page, its static files (`static/`) and the JSON endpoints.
"""
