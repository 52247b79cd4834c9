"""stepscope.profile() and start() in a script that `stepscope record` runs: the windows join that recording and
write no store of their own, which each says in one line. Prints what the windows gave back."""
import sys

import stepscope

own_profile, own_start = sys.argv[1], sys.argv[2]
with stepscope.profile(own_profile) as prof:
    for _ in range(3):
        stepscope.step()
print("profile_analysis", prof.analysis)
stepscope.start(own_start)
stepscope.step()
print("stop", stepscope.stop())
