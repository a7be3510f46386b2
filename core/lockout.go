package core

import (
	"fmt"
	"time"

	"github.com/apigate/ratelimit/internal/rules/limits"
)

// lockoutInvalid reports why p's lockout fields are not usable, or "".
func (p Policy) lockoutInvalid() string {
	lo := struct{ Duration, Max, Memory, cap time.Duration }{p.Lockout, p.LockoutMax, p.LockoutMemory, limits.LockoutCap(p.Lockout, p.LockoutMax)}
	if lo.Duration == 0 {
		if lo.Max != 0 || lo.Memory != 0 {
			return fmt.Sprintf("lockout max %v and memory %v are set without a duration", lo.Max, lo.Memory)
		}
		return ""
	}
	if lo.Duration < limits.MinLockout || lo.Duration > limits.MaxLockout {
		return fmt.Sprintf("lockout duration %v is out of range [%v, %v]", lo.Duration, limits.MinLockout, limits.MaxLockout)
	}
	if lo.Max != 0 && (lo.Max < lo.Duration || lo.Max > limits.MaxLockout) {
		return fmt.Sprintf("lockout max %v is out of range [duration %v, %v]", lo.Max, lo.Duration, limits.MaxLockout)
	}
	if lo.Memory != 0 && (lo.Memory < lo.cap || lo.Memory > limits.MaxLockoutMemory) {
		return fmt.Sprintf("lockout memory %v is out of range [the longest lockout %v, %v]", lo.Memory, lo.cap, limits.MaxLockoutMemory)
	}
	return ""
}
