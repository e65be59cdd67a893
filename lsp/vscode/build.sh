#!/usr/bin/env bash
# Builds the extension's .vsix, installable offline (`code --install-extension FILE`):
#   lsp/vscode/build.sh            -> lsp/vscode/dist/specd-vscode-<version>.vsix (its path on stdout's last line)
# npm ci from the committed package-lock.json (skipped when node_modules already matches it),
# tsc, then @vscode/vsce. npm's download cache is ~/.cache/specd/npm ($SPECD_NPM_CACHE), so a
# second run, or a CI re-run, needs no network.
set -euo pipefail
cd "$(dirname "$0")"
export npm_config_cache="${SPECD_NPM_CACHE:-$HOME/.cache/specd/npm}"
export npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false
if ! cmp -s package-lock.json node_modules/.specd-lock 2>/dev/null; then
  npm ci --prefer-offline --no-audit --no-fund >&2
  cp package-lock.json node_modules/.specd-lock
fi
rm -rf out
node_modules/.bin/tsc -p . >&2
version=$(node -p 'require("./package.json").version')
mkdir -p dist
out="dist/specd-vscode-$version.vsix"
node_modules/.bin/vsce package --allow-missing-repository --skip-license -o "$out" >&2
echo "$PWD/$out"
