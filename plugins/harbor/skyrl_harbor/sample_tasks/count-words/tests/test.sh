#!/bin/bash
# Runs the check, then writes reward.json from its exit status.
cd /app
if python3 /tests/check_count.py; then
  echo '{"reward": 1.0}' > /logs/verifier/reward.json
else
  echo '{"reward": 0.0}' > /logs/verifier/reward.json
fi
