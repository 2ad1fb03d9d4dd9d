#!/usr/bin/env bash
# Makes sure apt knows the LibreOffice help packages (the default corpus is downloaded with
# `apt-get download`, never installed). Fetches package lists only when they are missing.
if command -v apt-cache >/dev/null 2>&1; then
  if ! apt-cache policy libreoffice-help-de 2>/dev/null | grep -q "Candidate: [0-9]"; then
    if [ "$(id -u)" = 0 ]; then
      apt-get update -qq || echo "apt-get update failed: the default corpus may not download" >&2
    else
      echo "apt has no package lists: run 'sudo apt-get update' once for the default corpus" >&2
    fi
  fi
fi
