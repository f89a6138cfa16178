"""Small services that import nothing of detector/: result files written
whole and free space (`files`), one run per folder (`workdir_lock`),
progress bars (`progress`), declared number ranges (`ranges`) and those the
config and predict.json share (`image_ranges`)."""
