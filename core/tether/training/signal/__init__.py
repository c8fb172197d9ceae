"""The learning signal: finished rollouts turned into transitions, credit assigned to them, packed into batches,
and the KV-cache figures of a step."""
