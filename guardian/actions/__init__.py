"""Actions taken on an incident: evidence capture (evidence.py with pyspy.py, redact.py,
summary.py and retention.py); alerting and remediation live in their own modules here.

Nothing is imported at package import time: each action module is imported where it is wired.
"""
