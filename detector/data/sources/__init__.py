"""Data sources side by side, each one split of one dataset behind the
`base.Source` protocol: a COCO-format folder (`coco_json`), the synthetic
shapes set (`shapes`) and TFDS `coco/2017` (`tfds`)."""
