"""Actions taken on an incident. Evidence capture: evidence.py (the collector), with pyspy.py
(argv, parsing, error meaning), bundle.py (writing a bundle folder), summary.py, redact.py and
retention.py. Other actions live in their own modules here.

Nothing is imported at package import time: each action module is imported where it is wired.
"""
