"""Training and scoring networks: the weight-sharing supernet and the archs taken from it.

`supernet_training.py` trains the supernet (sandwich rule, checkpoints, the training recipe `TrainConfig`);
`evaluation.py` scores archs with inherited weights (subnet extraction, batch-norm recalibration, journaled
scores); `finalize/` trains the chosen archs further in lockstep (`FinalizeConfig`) and scores them;
`captured_step.py` runs a training step as a captured CUDA graph; `session.py` is the frame every training loop
runs its steps in (stop requests, thread governor, progress, checkpoints).
"""
