"""The fleet store: its URL forms (single Redis, Sentinel, Cluster), the client built from one, and
the hash-tagged key names that keep what one script touches in one slot."""
