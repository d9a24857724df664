#!/bin/sh
# Dispatcher for the emulated node tools (dapo-ops simulated fleet): runs ascend_emu.py, and serves repeated
# read-only queries from a cache that any change of the hardware model or of the installed driver invalidates. While
# the NPUs' load moves (a load marker written in the last 2 minutes), an npu-smi answer is served for 5 s at most,
# npu-exporter's own collection interval for these readings; a marker newer than the cache invalidates it otherwise.
# The tools are symlinks to this file (npu-smi, hccn_tool, lspci, ...): the name it is called by is the tool.
here=${DAPO_SIM_HW_DIR:-/dev/.dapo-sim}
tool=${0##*/}
if [ "$tool" = run ]; then
  tool=$1
  shift
fi
case "$tool $*" in
  "npu-smi info"*|"lspci"*) cacheable=1 ;;
  "hccn_tool "*" -g") cacheable=1 ;;
  *) cacheable=0 ;;
esac
load=$here/load
moving=0
if [ "$tool" = npu-smi ] && [ -n "$(find "$load" -name '*.json' -mmin -2 2>/dev/null | head -n 1)" ]; then
  moving=1
fi
if [ "$cacheable" = 0 ]; then
  exec /usr/bin/python3 -S "$here/ascend_emu.py" "$tool" "$@"
fi
IFS=_
key="${tool}_$*"
unset IFS
case "$key" in
  */*|*..*|*" "*) exec /usr/bin/python3 -S "$here/ascend_emu.py" "$tool" "$@" ;;
esac
cached=$here/cache/$key
driver=${DAPO_SIM_ASCEND:-/usr/local/Ascend}/driver/version.info
fresh=0
if [ -f "$cached" ] && [ "$cached" -nt "$here/hw.json" ] && [ "$cached" -nt "$driver" ]; then
  fresh=1
  if [ "$moving" = 1 ]; then
    [ -n "$(find "$cached" -newermt "@$(( $(date +%s) - 5 ))" 2>/dev/null)" ] || fresh=0
  else
    for marker in "$load"/*.json; do
      if [ -e "$marker" ] && [ "$marker" -nt "$cached" ]; then fresh=0; fi
    done
  fi
fi
if [ "$fresh" = 1 ]; then
  exec cat "$cached"
fi
mkdir -p "$here/cache"
tmp=$cached.$$
/usr/bin/python3 -S "$here/ascend_emu.py" "$tool" "$@" > "$tmp"
rc=$?
if [ "$rc" = 0 ]; then
  mv -f "$tmp" "$cached"
  exec cat "$cached"
fi
cat "$tmp"
rm -f "$tmp"
exit "$rc"
