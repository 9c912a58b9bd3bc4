// Package logging gives gpufabric's binaries the logging flags of
// Kubernetes components (k8s.io/component-base/logs/api/v1):
// --logging-format (text or json), -v, --vmodule, --log-flush-frequency
// and the split-stream options, instead of klog's legacy flags
// (--logtostderr, --log_dir, --alsologtostderr, ...), which component-base
// deprecated.
//
// Rules: AddFlags before parsing, Apply right after, before the first log
// line and before any goroutine logs; the configuration is process-global
// (klog's), so a second Apply must carry the same settings.
//
// Files: logging.go.
package logging
