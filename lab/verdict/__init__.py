"""The judgement of a step: the facts derived once, an ordered table of rules, the verdict.

Between the record (below) and the run (above): `facts` derives what a step's figures say,
`rules` is the ordered table whose first firing rule names the step's limit and decides whether it
may be compared, `assess` applies it to a record, `capacity` is what the model's knobs allow.
"""
