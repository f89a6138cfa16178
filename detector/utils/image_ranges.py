"""Declared ranges of the fields that both the config's data section and an
exported artifact's predict.json carry (image sides, resize sizes, pixel
normalisation, class count): one home for the schema (detector/config/
data.py) and predict.json's checks (detector/predict/artifact_meta.py)."""

from detector.utils import ranges

# The longest image side of any recipe, with room (COCO's 1333, LSJ's 1024).
MAX_SIDE = 4096
SIDE = ranges.between(1, MAX_SIDE, "pixels")
IMAGE_SIZE = ranges.each(SIDE, length=2, shape="(height, width)")
MIN_SIZE = ranges.each(SIDE, min_length=1, shape="short sides")
MAX_SIZE = ranges.between(1, MAX_SIDE, "the long side at most")
PIXEL_MEAN = ranges.each(ranges.any_number(), length=3)
PIXEL_STD = ranges.each(ranges.above(0), length=3)
# LVIS, the largest common set, has 1203: the class heads grow with it.
NUM_CLASSES = ranges.between(1, 10000, "object categories")
