#!/bin/bash
# alternate cores: old (/work/old) and new (/work/main), same client (main); T turns
for t in $(seq ${T:-4}); do
  for b in old new; do
    d=/work/main/build/release; [ $b = old ] && d=${OLD:-/work/old/build/release}
    B=$d K=${K:-2} /tmp/paired.sh | sed "s/^/$b /"
  done
done
