"""Layer 7, training: from the oracle's demonstrations to a GRPO-trained policy.

`demos` (oracle demonstrations as a dataset), `sft` (the warm start, TRL's SFTTrainer), `reward`
(success first, then cost), `segments` (an episode's turns as training samples), `trainer`
(`CompactionGRPOTrainer`: TRL's GRPOTrainer with episodes in the environment), `train` (the
`accelerate launch` entry point), `vllm_sync` and `wandb_resume` (TRL glue). Beside `evaluation`;
neither imports the other.
"""
