#!/bin/bash
# the same core (main), clients old (/work/old) and new (/work/main) in turns
for t in $(seq ${T:-4}); do
  for b in old new; do
    CLIENT_B=$([ $b = old ] && echo /work/old/build/release || echo /work/main/build/release) B=/work/main/build/release PINGS=0 K=${K:-2} /tmp/paired.sh | sed "s/^/$b t$t /"
  done
done
