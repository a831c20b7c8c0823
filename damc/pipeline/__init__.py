"""The roof: the only package that runs label → train → export → evaluate (it imports the teacher and the scorer).

* `stages` — one stage = one module's `main(cfg)` on its composed config, fingerprinted and resumable; the demo
  pipeline (`make demo`) chains them;
* `study` — `Study`, the stages of the study (every dataset, one student, operating points on dev, test);
* `curve` — the learning curve (smaller students on nested subsets of the labels, scored on dev);
* `reproduce` — `make reproduce`: the study's stages in order, then the report.

Nothing below this package imports it (tests/unit/test_architecture.py).
"""
