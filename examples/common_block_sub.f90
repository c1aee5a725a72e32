! common_block_sub.f90 - the routines that receive COMMON /data/ r2 (a REAL*4
! array at 4 mod 8) and declare it REAL*8.  They live in their own file, as in
! the original code, so gfortran compiles them without knowing the caller's
! type or alignment and emits plain 8-byte SSE loads and stores (movsd,
! mulsd with a memory operand), each of which is misaligned here.

subroutine fill(x, len)
  implicit none
  integer, intent(in) :: len
  real(kind=8), intent(out) :: x(len)
  integer :: i
  do i = 1, len
    x(i) = 1.0d0            ! misaligned 8-byte write
  end do
end subroutine fill

subroutine scale(x, len)
  implicit none
  integer, intent(in) :: len
  real(kind=8), intent(inout) :: x(len)
  integer :: i
  do i = 1, len
    x(i) = i * x(i)         ! misaligned 8-byte read, then 8-byte write
  end do
end subroutine scale

real(kind=8) function dsum(x, len)
  implicit none
  integer, intent(in) :: len
  real(kind=8), intent(in) :: x(len)
  integer :: i
  dsum = 0.0d0
  do i = 1, len
    dsum = dsum + x(i)      ! misaligned 8-byte read
  end do
end function dsum
