#!/usr/bin/env bash
# Installs code-server (VS Code's workbench served to a browser) from npm for the extension's
# browser test, once, under ~/.cache/specd/vscode-test ($SPECD_VSCODE_TEST_DIR); prints the
# code-server executable's path on its last line. A second run only prints it.
#
# code-server 4.100.3 (VS Code 1.100.3) is the last release whose npm package runs on Node 20.
# Its npm postinstall builds VS Code's native modules and downloads ripgrep from GitHub, which
# this machine cannot reach; so the packages are installed with --ignore-scripts and the native
# modules rebuilt here, with ripgrep from the system (Debian: apt-get install ripgrep). Building
# needs g++, make, python3, pkg-config and the headers of libkrb5-dev, libx11-dev, libxkbfile-dev,
# libsecret-1-dev (.ci/run installs them when it runs as root).
set -euo pipefail
VERSION=4.100.3
BASE="${SPECD_VSCODE_TEST_DIR:-$HOME/.cache/specd/vscode-test}"
DIR="$BASE/code-server-$VERSION"
BIN="$DIR/node_modules/code-server/out/node/entry.js"
if [ -f "$DIR/.ready" ]; then
  echo "$DIR/node_modules/.bin/code-server"
  exit 0
fi
export npm_config_cache="${SPECD_NPM_CACHE:-$HOME/.cache/specd/npm}"
export npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false npm_config_yes=true
major=$(node -p 'process.versions.node.split(".")[0]')
[ "$major" = 20 ] || { echo "code-server $VERSION needs Node 20, found $(node --version)" >&2; exit 3; }
RG=$(command -v rg || true)
[ -n "$RG" ] || { echo "ripgrep (rg) is not on PATH (Debian: apt-get install ripgrep)" >&2; exit 3; }
rm -rf "$DIR"
mkdir -p "$DIR"
cd "$DIR"
echo '{"name": "specd-vscode-test", "private": true}' > package.json
npm install --prefer-offline --ignore-scripts "code-server@$VERSION" >&2
npm rebuild argon2 >&2                                  # code-server's own native module
cd node_modules/code-server/lib/vscode
npm install --prefer-offline --ignore-scripts --omit=dev >&2
mkdir -p node_modules/@vscode/ripgrep/bin
cp "$RG" node_modules/@vscode/ripgrep/bin/rg            # instead of its postinstall's GitHub download
npm rebuild kerberos @parcel/watcher @vscode/deviceid @vscode/spdlog native-watchdog node-pty >&2
# the rest of code-server's postinstall.sh
rm -rf node_modules.asar && ln -s node_modules node_modules.asar
(cd bin/remote-cli && ln -sf code-linux.sh code-server)
(cd bin/helpers && ln -sf browser-linux.sh browser.sh)
(cd extensions && npm install --prefer-offline --omit=dev >&2)
[ -f "$BIN" ]
"$DIR/node_modules/.bin/code-server" --version >&2
touch "$DIR/.ready"
echo "$DIR/node_modules/.bin/code-server"
