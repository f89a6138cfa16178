"""Inference, once for every caller: the detections function that the
exported artifact, predict.py's in-process model and evaluation all run
(`detect`), and the programs compiled once per canvas, training's and
inference's (`programs`). Contract of its outputs:
`detector.imaging.detections` (docs/architecture.md, "Inference")."""
