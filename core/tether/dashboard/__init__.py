"""The dashboard: runs and their curves, rollouts, traces, transitions and resources in the browser.

``tether dashboard --store <url> --runs runs/`` serves it (``tether.dashboard.server``); ``tether store
serve`` serves the same pages for the store it serves, under ``/dashboard/`` (``tether.dashboard.app.mount``).
The front end is hand-written HTML, CSS and JavaScript in ``static/``: no build step, nothing fetched from
elsewhere. This package imports nothing at import time.
"""
