"""The rollout engine: the session (store, backend, proxy, runners, run folder), the runners that run rollouts
(in process and on Ray), the gate that holds a task's group together, and the process's memory during training."""
