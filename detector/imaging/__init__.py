"""Host-side pixels for data, evaluation and predict: image files and their
EXIF orientation, the resize rule, canvases, resizing, mask pasting, RLE and
the drawing of detections (numpy and PIL only)."""
