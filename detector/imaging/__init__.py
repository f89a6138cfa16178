"""Host-side pixels for evaluation and predict: image files, resizing, mask
pasting and RLE (numpy and PIL only)."""
