package main

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"
)

// freeBytes returns the free space of the file system holding dir.
func freeBytes(dir string) (uint64, error) {
	u, err := vfs.Default.GetDiskUsage(dir)
	return u.AvailBytes, err
}

// freeSpaceGauge exports the free space of the data directory.
func freeSpaceGauge(dataDir string) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ebbflow_data_dir_free_bytes",
		Help:        "Bytes free on the file system of the data directory (tables refuse writes below their reserve).",
		ConstLabels: prometheus.Labels{"data_dir": dataDir}}, func() float64 {
		free, err := freeBytes(dataDir)
		if err != nil {
			return -1
		}
		return float64(free)
	})
}

// lowSpaceWarning says, for /readyz, when the data directory has less than
// min bytes free ("" otherwise).
func lowSpaceWarning(dataDir string, min uint64) string {
	free, err := freeBytes(dataDir)
	switch {
	case err != nil:
		return fmt.Sprintf("free space of data dir %s unknown: %v", dataDir, err)
	case free < min:
		return fmt.Sprintf("data dir %s has %d bytes free, below --min-free-space %d: tables refuse writes when nearly full", dataDir, free, min)
	}
	return ""
}
