"""Output-correctness gates: is the text a server answers with *right*, not just present.

The levels, each a small pure module (no I/O):

- ``format_check``   L1: control characters, runs, repeated fragments, odd code points,
  script soup, an empty answer;
- ``perplexity``     L2: perplexity of a fixed reference text against the target's baseline;
- ``distribution``   L3: NaN/±inf logprobs, entropy, top-1 mass from ``top_logprobs``;
- ``agreement``      L4: greedy-answer fingerprints compared across instances of one model;
- ``known_answers``  L5: configured prompts with a regex or the baseline answer.

Around them: ``vllm_answers`` parses vLLM's completion shapes, ``judge`` turns one round of
answers plus the baseline into failures (``l4_judge``: L4 from the peers' fingerprints),
``baseline`` persists baselines under the state dir, ``ledger`` keeps each target's recent
verdicts for the ``output_corruption`` detector, ``reports`` parses reports from gates
elsewhere (within ``bounds``), ``intake`` decides which of them are let in, ``trust`` signs
and checks messages (reports, decisions, ``exchange``'s L4 fingerprints), ``round`` asks a
target (the only module here that does I/O, through the HTTP seam) and ``gateway`` is the
small library a gateway imports to check live traffic and report.
"""
