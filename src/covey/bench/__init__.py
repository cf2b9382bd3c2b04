"""covey.bench: comparisons with the incumbents (HF `generate`, TRL's GRPOTrainer). Never imported
by the training path; `covey bench ...` and benchmarks/ call it."""
