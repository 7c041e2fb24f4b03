"""Component tier: several real parts together on a fake /proc, a scripted HTTP server and a fake clock."""
