"""Rewards without an answer key: reward objects that score a task's whole group of rollouts at once.

``tether.Judge`` (a judge model ranks the group from what tether captured, ``tether.rewards.judge``) and
``tether.MajorityVote`` (agreement within the group, ``tether.rewards.majority``) go in ``tether.wrap``'s
``reward=`` like a function: alone, in a weighted list with the user's function, or per sub-agent in a mapping
(``tether.rewards.plan``). The runner scores a group once every rollout of it has finished
(``tether.training.engine.group_gate``). Nothing here imports torch or a framework.
"""
