"""train.py's last line."""

from detector.launch.console import next_steps

NEXT = (
    "next: python eval.py --workdir=workdirs/shapes, python export.py "
    "--workdir=workdirs/shapes, python predict.py --workdir=workdirs/shapes "
    "IMAGES..."
)


def test_a_finished_run_names_workdir_ap_and_next_commands():
    results = {"bbox": {"AP": 0.8123}, "segm": {"AP": 0.79}}
    assert next_steps.final_line("workdirs/shapes", results, 2000) == (
        "trained workdirs/shapes to step 2000: bbox AP 0.812, segm AP "
        f"0.790; {NEXT}"
    )


def test_a_run_without_evaluation_says_so():
    line = next_steps.final_line("workdirs/shapes", {}, 4)
    assert line == f"trained workdirs/shapes to step 4: not evaluated; {NEXT}"


def test_a_complete_workdir_says_so_and_is_not_evaluated_again():
    results = {next_steps.COMPLETE: 4, "bbox": {"AP": 0.5}}
    assert next_steps.final_line("workdirs/shapes", results, 4) == (
        "workdirs/shapes is already trained to step 4 (bbox AP 0.500); not "
        f"evaluated again (--evaluate_finished does); {NEXT}"
    )


def test_a_workdir_with_spaces_is_quoted_in_the_commands():
    line = next_steps.final_line("my runs/a", {}, 1)
    assert "python eval.py --workdir='my runs/a'" in line
