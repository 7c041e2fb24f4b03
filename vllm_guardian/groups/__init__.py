"""Groups: the ranks of one multi-node or data-parallel deployment supervised as a unit.

``identity`` reads which group a process belongs to from what the deployment already says (vLLM's
data-parallel flags, Ray's executor flag and worker titles, LeaderWorkerSet's environment and pod
labels, or the operator's config); ``record`` is the signed record each node publishes of its members
in the fleet store, and how a headless rank finds its leader there. See docs/groups.md.
"""
