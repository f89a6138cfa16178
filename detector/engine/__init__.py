"""The training loop: the loop itself (`train_lib`), the jitted
data-parallel step (`train_step`), metrics files and TensorBoard
(`train_metrics`) and the one console line per log step (`console`)."""
