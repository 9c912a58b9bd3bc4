package devices

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/klog/v2"
)

// IMEX (Import/Export) channels let the GPUs of several nodes of one
// multi-node NVLink domain share memory. The NVIDIA driver registers the
// character device "nvidia-caps-imex-channels"; channel n is minor n of its
// major. A container may use the memory another container exported only if
// both hold the same channel, and only while the node's IMEX daemon runs.
const (
	// IMEXDeviceName is the driver's entry in /proc/devices.
	IMEXDeviceName = "nvidia-caps-imex-channels"
	// DefaultIMEXChannels is the driver's default NVreg_ImexChannelCount.
	DefaultIMEXChannels = 2048
	// MaxIMEXChannels bounds what /proc/driver/nvidia/params may claim (a
	// minor number has 20 bits).
	MaxIMEXChannels = 1 << 20
	// maxProcFileSize bounds what is read of a proc file.
	maxProcFileSize = 64 << 10
)

// IMEXInfo is what the driver offers for IMEX channels on this node.
type IMEXInfo struct {
	// Major is the character device major of nvidia-caps-imex-channels; 0
	// when /proc/devices does not list it (a driver without IMEX).
	Major int
	// Channels is the driver's channel count (ImexChannelCount in
	// /proc/driver/nvidia/params), DefaultIMEXChannels when not stated.
	Channels int
}

// readIMEX reads the IMEX channel major from <procRoot>/devices and the
// channel count from <procRoot>/driver/nvidia/params. Rules: a missing or
// unreadable /proc/devices, or one without the entry, means no IMEX (Major
// 0); a count that is missing or not a number in 1..MaxIMEXChannels is the
// default (logged when present but invalid).
func readIMEX(ctx context.Context, procRoot string) IMEXInfo {
	logger := klog.FromContext(ctx)
	info := IMEXInfo{Channels: DefaultIMEXChannels}
	data, err := readBounded(filepath.Join(procRoot, "devices"))
	if err != nil {
		logger.V(2).Info("No IMEX channels: cannot read /proc/devices", "err", err)
		return info
	}
	info.Major = charDeviceMajor(data, IMEXDeviceName)
	params, err := readBounded(filepath.Join(procRoot, "driver", "nvidia", "params"))
	if err != nil {
		return info
	}
	if v, ok := paramValue(params, "ImexChannelCount"); ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxIMEXChannels {
			logger.Error(nil, "Ignoring invalid ImexChannelCount, using the default", "value", v, "default", DefaultIMEXChannels)
		} else {
			info.Channels = n
		}
	}
	return info
}

// charDeviceMajor returns the major of a character device named exactly
// name in a /proc/devices listing, 0 if there is none. Only the "Character
// devices:" section counts; a line is a major in plain digits (the
// kernel's "%3d %s") and the name, whatever blanks between; a major must
// be in 1..4095.
func charDeviceMajor(data []byte, name string) int {
	chars := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasSuffix(line, "devices:"):
			chars = line == "Character devices:"
			continue
		case !chars:
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 || fields[1] != name {
			continue
		}
		if major, err := strconv.Atoi(fields[0]); err == nil && major > 0 && major < 4096 && fields[0] == strconv.Itoa(major) {
			return major
		}
	}
	return 0
}

// paramValue finds "Key: value" in /proc/driver/nvidia/params.
func paramValue(data []byte, key string) (string, bool) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v), true
		}
	}
	return "", false
}

// readBounded reads at most maxProcFileSize bytes of a file.
func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	return io.ReadAll(io.LimitReader(f, maxProcFileSize))
}

// IMEXReady is the status the IMEX daemon reports once it serves channels.
const IMEXReady = "READY"

// DefaultIMEXCtlTimeout bounds one run of the IMEX control command.
const DefaultIMEXCtlTimeout = 5 * time.Second

// IMEXCtl asks the node's IMEX daemon for its status with its control
// command, "nvidia-imex-ctl -q" ("query once"), which prints READY when the
// daemon serves channels.
type IMEXCtl struct {
	// Command is the program and its arguments, e.g.
	// ["/usr/bin/nvidia-imex-ctl", "-c", "/etc/nvidia-imex/config.cfg", "-q"].
	Command []string
	// Timeout bounds one run; DefaultIMEXCtlTimeout when zero.
	Timeout time.Duration
}

// Status runs the command and returns the first line it printed (at most
// 128 printable bytes). A failed or silent run is an error naming the
// command; a daemon that answers anything but READY is not an error.
func (c IMEXCtl) Status(ctx context.Context) (string, error) {
	if len(c.Command) == 0 {
		return "", errors.New("no imex control command configured")
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultIMEXCtlTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, c.Command[0], c.Command[1:]...)
	// A child that keeps the output open must not hold the caller past the timeout.
	cmd.WaitDelay = time.Second
	// One writer for both: exec then calls Write from one goroutine at a time.
	w := &limitedWriter{w: &out, n: 4096}
	cmd.Stdout, cmd.Stderr = w, w
	err := cmd.Run()
	status := FirstLine(out.String())
	if err != nil {
		return status, fmt.Errorf("run %s: %w (output %q)", c.Command[0], err, status)
	}
	if status == "" {
		return "", fmt.Errorf("run %s: no output", c.Command[0])
	}
	return status, nil
}

// FirstLine returns s's first non-empty line, trimmed, with bytes outside
// printable ASCII replaced by '?', cut to 128 bytes: daemon output goes
// into errors and events.
func FirstLine(s string) string {
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		b := []byte(line)
		for i, c := range b {
			if c < 0x20 || c > 0x7e {
				b[i] = '?'
			}
		}
		if len(b) > 128 {
			b = b[:128]
		}
		return string(b)
	}
	return ""
}

// limitedWriter keeps the first n bytes and drops the rest.
type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(len(p), l.n)
		_, _ = l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}
