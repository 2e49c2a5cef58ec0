//go:build darwin || freebsd || netbsd

package filecache

import "syscall"

func changeTime(s *syscall.Stat_t) int64 { return int64(s.Ctimespec.Sec)*1e9 + int64(s.Ctimespec.Nsec) }
