"""What would change the token (issue 34, docs/whatif.md): the elasticity of the token to every
number a run reads (sensitivity.py), the value of one number that meets a target (goal.py),
and speculative decoding / multi-token prediction as a workload (speculative.py). The numbers
themselves, how each is found and changed, are in numbers.py."""
