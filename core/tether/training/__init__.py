"""Running and scoring rollouts for training: the session (store, backend, proxy, runners, run folder),
runners (in process and on Ray), transitions and credit, progress, the dev report and the fit result.
Algorithms build on this package; the ``Trainer`` façade sits above them.
"""
