# make bench: synthetic checkpoints, tpshard against cp/cat/a torch splitter (issue 8).
