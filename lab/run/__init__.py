"""The run sequence: plan; start, ready, verify and probe; warm-up; levels (steps), each judged for
its limit; stop. Also the generators that load each step."""
