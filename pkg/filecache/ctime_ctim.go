//go:build linux || openbsd || dragonfly || solaris || illumos

package filecache

import "syscall"

func changeTime(s *syscall.Stat_t) int64 { return int64(s.Ctim.Sec)*1e9 + int64(s.Ctim.Nsec) }
