"""On-policy distillation for rlcore (verl's ``distillation.*`` keys)."""
