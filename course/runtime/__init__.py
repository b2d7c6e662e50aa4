"""The hand-written runtime beneath the lessons: device choice and the simulator's patches, the CPU executor,
the student's solutions, versions, timing and small helpers. It never imports a lesson, a check or a tool."""
