"""Fleet policy (docs/policy.md): which profile a target gets, the percentage breaker, recurrence and
the per-code device-fault rules. Pure decisions, except the breaker, which talks to the fleet store."""
