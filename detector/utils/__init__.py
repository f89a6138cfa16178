"""Small services with no model in them: result files written whole and
free space (`files`), one run per workdir (`workdir_lock`), progress
bars (`progress`)."""
