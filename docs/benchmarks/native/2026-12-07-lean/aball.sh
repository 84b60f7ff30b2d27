#!/bin/bash
# HEAD (core, libgoblin, benchmark) against this change, in turns; SIZE objects
for t in $(seq ${T:-4}); do
  for b in old new; do
    if [ $b = old ]; then
      B=/work/old/build/release CLIENT_B=/work/old/build/release PINGS=0 K=${K:-2} /tmp/paired.sh | sed "s/^/$b t$t /"
    else
      B=/work/main/build/release CLIENT_B=/work/main/build/release K=${K:-2} /tmp/paired.sh | sed "s/^/$b t$t /"
    fi
  done
done
