"""A run's bookkeeping: its folder, settings, progress, health and preflight checks, the dev report, the gains
measured and the fit result."""
