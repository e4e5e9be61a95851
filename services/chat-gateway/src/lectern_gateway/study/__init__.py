"""Study tools: quizzes, answer checking and the syllabus explorer."""
