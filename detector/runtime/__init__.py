"""Running an exported detector: image files in, detections out.

The light side of `predict.py --exported`: it imports only numpy, PIL, jax
and the standard library (pycocotools where installed), never the model,
the config schema, the training engine, TensorFlow, Flax or orbax, so a
serving process needs none of them. This package imports nothing itself.

  images.py    read any JPEG/PNG as RGB uint8, letterbox as eval does
  masks.py     paste box-relative masks into their boxes' pixels (crops)
  rle.py       COCO RLE of pasted masks from their crops
  artifact.py  load and check an exported artifact, call it
  draw.py      one overlay PNG per image (PIL)
  predict.py   files -> batches -> predictions.json + overlays
"""
