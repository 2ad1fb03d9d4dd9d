#!/usr/bin/env bash
# Installs Debian's Chromium and its WebDriver for the live page's browser test (tests/test_live_page.py),
# when they are missing. Never fails: without apt (or root), the browser test skips and says why.
CHROMIUM=/usr/bin/chromium
CHROMEDRIVER=/usr/bin/chromedriver
if [ -x "$CHROMIUM" ] && [ -x "$CHROMEDRIVER" ]; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "no apt-get: Chromium is not installed and the live page's browser test will skip" >&2
  exit 0
fi
SUDO=
if [ "$(id -u)" != 0 ]; then
  if sudo -n true 2>/dev/null; then SUDO="sudo -n"; else
    echo "not root: run 'sudo apt-get install chromium chromium-driver' for the live page's browser test" >&2
    exit 0
  fi
fi
echo "installing chromium and chromium-driver with apt-get (once) ..." >&2
if ! { $SUDO apt-get update -qq &&
       DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium chromium-driver; } >/dev/null 2>&1; then
  echo "apt-get could not install chromium and chromium-driver: the live page's browser test will skip" >&2
fi
exit 0
