// Package deploy holds example operations files for `seckill serve` — a
// Prometheus scrape configuration with alert rules and their unit tests, a
// Grafana dashboard, a systemd unit and its environment file — and the
// tests that validate them with promtool and systemd-analyze and check every
// metric they name against the ones the service registers. It has no Go API;
// see README.md in this directory.
package deploy
